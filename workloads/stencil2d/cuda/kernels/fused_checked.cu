    stream_two_steps<false>(in, out, ring, n, xb, y0);
