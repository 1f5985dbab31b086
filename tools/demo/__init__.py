"""The demo: load generator, verdict, and the orchestration behind `consumer demo`."""
