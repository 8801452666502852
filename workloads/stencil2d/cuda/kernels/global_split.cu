    // Blocks whose outputs and taps all lie inside the grid skip every test (a block-uniform branch).
    const int bx0 = blockIdx.x * BX, by0 = blockIdx.y * TILE_H;
    const bool interior = bx0 >= R && by0 >= R && bx0 + BX + R <= n && by0 + TILE_H + R <= n;
    if (interior)
        thread_outputs<false>(in, out, n, x, y0);
    else
        thread_outputs<true>(in, out, n, x, y0);
