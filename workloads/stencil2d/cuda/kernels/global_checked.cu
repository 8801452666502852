    thread_outputs<true>(in, out, n, x, y0);
