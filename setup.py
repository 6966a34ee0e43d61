"""pluglog distribution: the broker package plus its twistd plugin file."""

from setuptools import Extension, find_packages, setup

setup(
    name="pluglog",
    version="0.1.0",
    description="A Kafka-protocol distributed commit log on Twisted, built from plugins",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["pluglog", "pluglog.*"]) + ["twisted.plugins"],
    package_data={
        "twisted.plugins": ["pluglog_tap.py"],
        "pluglog.console": ["templates/*", "static/*"],
    },
    # The produce-time record walk in C; optional: without a compiler the
    # broker falls back to aiokafka's Cython iterator (pluglog/broker/validation.py).
    # The Twisted client's per-record encode/decode in C, optional too: without
    # it pluglog.client uses the Python codec (pluglog/protocol/records.py).
    ext_modules=[
        Extension("pluglog._recordwalk", ["pluglog/_recordwalk.c"], optional=True),
        Extension(
            "pluglog._clientcodec",
            ["pluglog/_clientcodec.c"],
            depends=["pluglog/_zigzag.h"],
            optional=True,
        ),
        # The producer's send()/ack path in C (pluglog/client/batches.py has
        # the Python fallback).
        Extension(
            "pluglog._producerbuffer",
            ["pluglog/_producerbuffer.c"],
            depends=["pluglog/_zigzag.h"],
            optional=True,
        ),
    ],
    install_requires=[
        "twisted>=24.0",
        "zope.interface>=6.0",
        "pluggy>=1.5",
        # /metrics: registry, collectors and exposition (pluglog.metrics)
        "prometheus_client>=0.17",
        "jinja2>=3.1",  # /console/'s templates (pluglog.console)
        "crc32c>=2.4",
        "crcmod>=1.7",
        "kazoo>=2.10",
        "fastavro>=1.9",
        # produce-time record validation: the C record walk and the codecs
        "aiokafka>=0.12",
        "python-snappy>=0.7",
        "lz4>=4.0",
        "zstandard>=0.22",
        "cramjam>=2.8",
        # security: TLS listeners (Twisted's TLS needs pyOpenSSL + service-identity),
        # PEM certificates and SCRAM (RFC 5802/7677)
        "pyOpenSSL>=24.0",
        "service-identity>=24.1",
        "cryptography>=42",
        "scramp>=1.4",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "selenium>=4.10",  # the console's browser test (headless Chromium)
            "sphinx>=7",
            "wheel",
            "setuptools>=61",
            "ruff>=0.6",
            # the layers contract in pyproject.toml (lint-imports) and the
            # import-cycle test (grimp, which import-linter brings)
            "import-linter>=2.1",
            # type checking of protocol, storage, interfaces and client
            "mypy>=1.10",
            "mypy-zope>=1.0",
            "confluent-kafka>=2.6",
            # confluent_kafka.schema_registry's imports (its [schemaregistry]
            # extra pins a certifi newer than PyPI has): the interop tests.
            "httpx2>=2.0",
            "authlib>=1.8",
            "cachetools>=5.5",
            "attrs>=21.2",
            "kafka-python>=3.0",
            "aiokafka>=0.12",
            "python-snappy>=0.7",
            "cramjam>=2.8",
            "lz4>=4.0",
            "zstandard>=0.22",
            "hypothesis>=6.100",
            # The registry's optional JSON Schema provider and
            # confluent_kafka.schema_registry.json_schema (interop tests).
            "jsonschema>=4.18",
            "referencing>=0.30",
        ],
        "jsonschema": ["jsonschema>=4.18"],
        "docs": ["sphinx>=7"],
    },
    entry_points={"console_scripts": ["pluglog = pluglog.cli.main:main"]},
    classifiers=[
        "Framework :: Twisted",
        "Programming Language :: Python :: 3",
        "Topic :: System :: Distributed Computing",
    ],
)
