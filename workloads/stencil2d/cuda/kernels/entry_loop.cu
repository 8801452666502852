    // One launch per step, ping-ponging between scratch and out so that the last step writes out; field is
    // only read. (With tiling=ring, fuse_steps=True runs two steps per launch instead.)
    const double* src = field.data_ptr<double>();
    for (int64_t s = 0; s < steps; ++s) {
        double* dst = (steps - s) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        launch_step(src, dst, n${pairs_arg}, stream);
        src = dst;
    }
