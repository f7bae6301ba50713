// The source of weft_test_pch, the target whose precompiled header (GoogleTest and
// GoogleMock) every test reuses; it compiles nothing of its own.
