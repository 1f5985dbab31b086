"""The wiring: the one layer that builds things from the settings and joins the layers below.

It creates the AWS clients (:mod:`consumer.runtime.clients`), the processor registry with the
built-in sinks (:mod:`consumer.runtime.processors`) and the worker — stream target, lease store,
coordinator, shard sync and scheduler — (:mod:`consumer.runtime.worker`). The layers below receive
what they need as arguments and import nothing from here; the commands above call into it.
"""
