"""The deployed fleet under one fault model: prod as its synthesized templates deploy it,
its Auto Scaling group, instances (boot, units, the real watchdog and health judge), tables, stream,
alarms, topic, follow jobs and bill, run for seeded histories and judged against the operational
promises.

Layout, bottom up: ``clock`` (seeded events), ``templates`` (the synthesized extract), ``tables``,
``stream``, ``workers`` (one worker process, modelled) and ``leasing`` (leases and records across
them), ``heartbeat_files`` and ``aws_clients`` (what the real watchdog reads and calls),
``boot_outcomes`` (the real boot scripts' answers), ``instance``, ``group``, ``stack``,
``alarms``, ``pipeline_jobs``, ``cost``, ``environment``, ``fleet`` and ``minutes`` (one history),
``scenarios`` (what a seed draws), ``promises`` (the checker), ``slices`` (the data path, by the real
worker of simulation/world.py), ``histories`` (seed -> judged history). bench/operations.py runs the
long form; tests/simulation/test_operations.py the short one.
"""
