    // Two steps per launch while two remain (one step per launch when pairs is false), then one; the
    // launches ping-pong between scratch and out so that the last one writes out; field is only read.
    const int64_t launches = pairs ? steps / 2 + steps % 2 : steps;
    const double* src = field.data_ptr<double>();
    for (int64_t l = 0, s = 0; l < launches; ++l) {
        double* dst = (launches - l) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        if (pairs && steps - s >= 2) {
            launch_two_steps(src, dst, n, stream);
            s += 2;
        } else {
            launch_step(src, dst, n${pairs_arg}, stream);
            s += 1;
        }
        src = dst;
    }
