"""ISR replication: the replica manager, replica fetchers and leader epochs.

Owns leading and following (high watermark, ISR changes through the
coordinator), the follower's fetch loop and its connection to the leader
(:mod:`pluglog.replication.peer`), and the replication throttle. May import
coordination, security, client, storage, protocol and below; never broker,
group (an independence contract), server or anything above.
"""
