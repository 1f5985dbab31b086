"""consumer's public face: what code outside consumer/ may import, apart from the processor API.

Code outside the worker -- the ``consumer`` command, the demo, the benchmarks, the stacks, a user's
processor -- imports consumer only through these modules (the house test enforces it; the list is
``FACE`` in scripts/house_rules.py):

* :mod:`consumer.processing` and :mod:`consumer.records`: the processor API a user's processor is
  written on, the records it receives and the errors it raises or meets (the docs, the examples and
  the projects ``consumer new`` writes import them by these names);
* :mod:`consumer.api.worker`: a worker assembled from its ports and run (``consumer run``, the
  benchmarks' workers): the composition root, the ports' pieces, the parts it returns;
* :mod:`consumer.api.leases`: the leases and workers tables read from outside (``consumer leases``,
  the dashboard, the demo): the model, the DynamoDB store, liveness, the errors;
* :mod:`consumer.api.aws`: the AWS clients of an environment, configured as the worker's are;
* :mod:`consumer.api.metrics`: the metric catalogue (names, units, aggregation) and the recorder;
* :mod:`consumer.api.sinks`: the built-in processors, for a processor that wraps one;
* :mod:`consumer` itself, for ``__version__``.

Why a package of small modules and not re-exports in consumer's ``__init__`` or in each room's:
importing ``consumer.leases.model`` runs ``consumer/leases/__init__.py`` first, so a room whose
``__init__`` re-exported its face would make every import inside the worker pay for the whole room,
and ``consumer``'s would make ``consumer --help`` load boto3's clients. Here each module holds one
audience's names and imports only what they need, nothing imports this package eagerly, and nothing
inside consumer imports it (it is the top floor): a room may split or rename its modules freely as
long as the names below still resolve, and the house test shows the one place to change.
"""
