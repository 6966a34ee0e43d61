"""pluglog distribution: the broker package plus its twistd plugin file."""

from setuptools import Extension, find_packages, setup


def _requirements(path):
    with open(path, encoding="utf-8") as handle:
        lines = (line.split("#", 1)[0].strip() for line in handle)
        return [line for line in lines if line]


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
    # broker uses the pure-Python reference walk (pluglog/broker/validation.py).
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
    # requirements.txt: what the broker imports; requirements-test.txt: the
    # suite's clients and checks ([tool.deptry] in pyproject.toml checks both).
    install_requires=_requirements("requirements.txt"),
    extras_require={
        "test": _requirements("requirements-test.txt"),
        "jsonschema": ["jsonschema>=4.18"],
        # tiered storage's s3 provider (pluglog.storage.remote.s3 imports it)
        "s3": ["boto3>=1.34"],
        "docs": ["sphinx>=7"],
    },
    entry_points={"console_scripts": ["pluglog = pluglog.cli.main:main"]},
    classifiers=[
        "Framework :: Twisted",
        "Programming Language :: Python :: 3",
        "Topic :: System :: Distributed Computing",
    ],
)
