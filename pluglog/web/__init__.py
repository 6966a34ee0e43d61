"""The broker's HTTP listener for web services (``twistd pluglog --http``).

:mod:`pluglog.web.site` owns the listener service and the root resource that
plugins extend through ``pluglog_add_web_resources(broker, root)``;
:mod:`pluglog.web.registry` is the built-in schema registry's REST resource,
served at the Confluent Schema Registry's own paths; :mod:`pluglog.web.metrics`
serves the broker's Prometheus registry at ``/metrics``.

It may import server, metrics, broker and everything below (docs/architecture.rst,
Layers); the service starts it.
"""
