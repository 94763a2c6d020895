//! Hostile and malformed input: errors, never panics or huge allocations.
