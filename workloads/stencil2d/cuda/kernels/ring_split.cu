    // Blocks whose segment columns all lie inside the grid copy and store without tests (block-uniform).
    if (xb - HX >= 0 && xb + BX * W + HX <= n)
        stream_strip<PAIRS, true>(in, out, ring, n, xb, y0);
    else
        stream_strip<PAIRS, false>(in, out, ring, n, xb, y0);
