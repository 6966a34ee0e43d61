"""pluglog-audit: the 2011 Kafka paper's auditing, as a third-party pluglog plugin."""

from setuptools import setup

setup(
    name="pluglog-audit",
    version="0.1.0",
    description="Produced-vs-consumed record audit for pluglog (Kafka paper, section 5)",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=["pluglog_audit"],
    install_requires=["pluglog", "confluent-kafka>=2.3"],
    extras_require={"test": ["pytest"]},
    entry_points={"pluglog": ["audit = pluglog_audit.plugin"]},
)
