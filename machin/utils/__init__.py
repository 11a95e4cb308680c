"""Reading, writing and checking helpers shared by the whole library."""
