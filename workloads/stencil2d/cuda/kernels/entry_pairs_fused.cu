    // double2 loads need even rows and a 16-byte aligned grid (out and scratch are fresh allocations).
    // The two-step kernel copies 16 bytes at a time: it runs only then.
    const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(field.data_ptr<double>()) % 16 == 0;
