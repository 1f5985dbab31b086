"""What runs on a worker instance before (and beside) the workers: the bootstrap, the unit texts
and the watchdog. Shipped in the CDK asset; everything the bootstrap imports is standard library,
because it runs with the instance's bare ``python3.11`` before the virtualenv exists."""
