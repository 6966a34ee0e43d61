"""The fuzz harness: schema-driven, captured-and-mutated and raw input against a broker process.

tests/integration/test_fuzz.py runs a bounded campaign in the suite;
bench/fuzz.py runs long ones and prints the figures for bench/RESULTS.md.
"""
