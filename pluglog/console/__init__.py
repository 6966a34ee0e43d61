"""The read-only web console at ``/console/`` on the ``--http`` listener (issue 23).

:mod:`pluglog.console.state` reads the broker's state in-process (cluster,
topics, partitions, consumer groups, schema registry subjects) into plain
values; :mod:`pluglog.console.browse` reads and formats records of one
partition for the message browser; :mod:`pluglog.console.decode` decodes
framed Avro and JSON Schema values through the broker's schema registry;
:mod:`pluglog.console.resource` is the
twisted.web resource: it parses and bounds the URL's parameters, answers
bad ones with a readable 400/404 page and renders the Jinja2 templates in
``templates/``. Nothing here makes a Kafka request: it reads the same
objects the request handlers use, on the reactor thread.

It sits just below web (docs/architecture.rst, Layers), which mounts it;
it imports client, serialization and protocol helpers (and reads the
broker object it is handed), never server, metrics, web or the service.
"""
