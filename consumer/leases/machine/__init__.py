"""The lease side of one worker as a sans-I/O machine: what happened goes in, what to do comes out.

:class:`~consumer.leases.machine.machine.LeaseMachine` holds everything the worker knows about its
leases -- what it holds and under which ownership, the fence, hand-over marks and their deadlines,
deliveries and checkpoint writes in flight, positions processed and not written yet, the last view
of the tables and what the next round must read, its heartbeat row -- and never calls the tables,
reads a clock or waits. :class:`~consumer.leases.driver.MachineDriver` drives it: it reads the
clock, steps the machine under one lock, performs the requests the machine makes on the lease store
outside that lock and feeds the answers back (:mod:`.actions` is the vocabulary);
:class:`~consumer.leases.coordinator.LeaseCoordinator` is the face the rest of the worker calls.
"""
