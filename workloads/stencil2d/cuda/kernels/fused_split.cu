    // Blocks whose input segment lies inside the grid copy and store without tests (block-uniform).
    if (xb - 2 * HX >= 0 && xb + BX * W <= n)
        stream_two_steps<true>(in, out, ring, n, xb, y0);
    else
        stream_two_steps<false>(in, out, ring, n, xb, y0);
