"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor maps ``members`` (``{member_id: subscribed topic ids}``),
``topics`` (``{topic_id: partition count}``) and the previous target
(``{member_id: {topic_id: frozenset}}``) to a new target of the same shape,
as Kafka's ``ConsumerGroupPartitionAssignor.assign`` does. Both are
deterministic: every coordinator that loads the group computes the same.

* ``uniform`` (Kafka's ``UniformAssignor``): every member gets as even a
  share of the partitions it subscribes to as possible, and a partition
  stays with its previous owner whenever balance allows (sticky), so a
  change moves as few partitions as it can.
* ``range`` (Kafka's ``RangeAssignor``): per topic, the subscribed members
  in member-id order get contiguous ranges, the first ``count % n`` one
  more; members subscribed to co-partitioned topics get the same partition
  numbers of each.
"""


def uniform(members, topics, previous):
    quota = {m: 0 for m in members}
    # How many partitions each member should end with: deal the partitions
    # of each topic round-robin over its subscribers, fewest-loaded first.
    subscribers = {
        t: sorted(m for m, subs in members.items() if t in subs) for t in sorted(topics)
    }
    for topic in sorted(topics):
        subs = subscribers[topic]
        for _ in range(topics[topic] if subs else 0):
            target = min(subs, key=lambda m: (quota[m], m))
            quota[target] += 1
    out = {m: {} for m in members}
    load = dict.fromkeys(members, 0)
    unassigned = []
    for topic in sorted(topics):
        subs = set(subscribers[topic])
        owner_of = {}
        for m, assignment in previous.items():
            if m in subs:
                for p in assignment.get(topic, ()):
                    owner_of[p] = m
        for p in range(topics[topic]):
            m = owner_of.get(p)
            if m is not None and load[m] < quota[m]:
                out[m].setdefault(topic, set()).add(p)
                load[m] += 1
            elif subs:
                unassigned.append((topic, p))
    for topic, p in unassigned:
        candidates = [m for m in subscribers[topic]]
        below = [m for m in candidates if load[m] < quota[m]] or candidates
        m = min(below, key=lambda m: (load[m] - quota[m], load[m], m))
        out[m].setdefault(topic, set()).add(p)
        load[m] += 1
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


def range_(members, topics, previous):
    out = {m: {} for m in members}
    for topic in sorted(topics):
        subs = sorted(m for m, s in members.items() if topic in s)
        if not subs:
            continue
        n = topics[topic]
        share, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = share + (1 if i < extra else 0)
            if size:
                out[m][topic] = frozenset(range(start, start + size))
            start += size
    return out


ASSIGNORS = {"uniform": uniform, "range": range_}
