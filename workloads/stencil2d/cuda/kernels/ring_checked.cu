    stream_strip<PAIRS, false>(in, out, ring, n, xb, y0);
