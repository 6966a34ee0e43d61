"""pluglog-audit: per-window produced counts and the ``pluglog audit`` comparison.

:mod:`pluglog_audit.counts` owns windows and the audit records' format,
:mod:`pluglog_audit.producer` the counting producer wrapper,
:mod:`pluglog_audit.report` the produced-vs-consumed comparison and
:mod:`pluglog_audit.plugin` the ``audit`` subcommand hook.
"""

from pluglog_audit.producer import AuditingProducer

__all__ = ["AuditingProducer"]
