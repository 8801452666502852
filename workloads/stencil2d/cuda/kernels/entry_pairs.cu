    // double2 loads need even rows and a 16-byte aligned grid (out and scratch are fresh allocations).
    const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(field.data_ptr<double>()) % 16 == 0;
