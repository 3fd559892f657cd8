"""Simulation engine: SimPy run loop, fabric reservations, tracer, deadlock detection."""
