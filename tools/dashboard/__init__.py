"""The dashboard outside AWS: the one widget list the CloudWatch dashboard draws too (``widgets``), the
EMF documents read back (``readback``) into time series (``series``), the PNG and its page
(``render``, ``page``), the live page (``live``), and the prices the cost panel multiplies by.

It lives in tools/, not in consumer/, because no worker draws a dashboard: a worker only publishes
EMF documents (``consumer.telemetry``); ``infra`` imports the list from here to build CloudWatch's.
"""
