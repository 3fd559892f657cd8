"""`kernbench demo`: placeholder until filled in below."""
