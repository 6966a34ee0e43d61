"""Prometheus metrics of one broker (issue 23): what is counted and how it is collected.

:mod:`pluglog.metrics.recorder` owns the hot-path counters the server bumps
per request (latency histograms, error codes, bytes out, throttle time);
:mod:`pluglog.metrics.traffic`, :mod:`pluglog.metrics.state` and
:mod:`pluglog.metrics.tiered` (tiered storage) are
prometheus_client collectors that read those counters and the broker's state
(partitions, replication, coordination, consumer groups) on scrape;
:mod:`pluglog.metrics.registry` puts them and the process collector into one
``CollectorRegistry`` per broker. The web layer serves it at ``/metrics``.

It sits between server and broker (docs/architecture.rst, Layers): the
server imports the recorder; this package imports broker and everything
below, never server, web or the service.
"""
