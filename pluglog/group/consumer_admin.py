"""The admin side of KIP-848 consumer groups: ConsumerGroupDescribe, the
member-epoch checks of OffsetCommit/OffsetFetch, and the tombstones that
delete a consumer group's records.

A base class of :class:`pluglog.group.consumer.ConsumerGroupOperations`
(so of the coordinator); it reads the coordinator's ``groups`` and
``broker``.
"""

import uuid

from pluglog.errors import (
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    NONE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
)
from pluglog.group.consumer_model import CONSUMER
from pluglog.group.consumer_records import group_tombstones, member_tombstones

#: ConsumerGroupDescribe v1's MemberType (KIP-1099)
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


def is_consumer_group(group):
    return getattr(group, "kind", None) == CONSUMER


class ConsumerGroupAdmin:
    """ConsumerGroupDescribe and the consumer groups' offset rules."""

    # -- ConsumerGroupDescribe ---------------------------------------------------

    def describe_consumer_group(self, group_id):
        """A ConsumerGroupDescribe ``groups`` entry (without authorized_operations)."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id) if error == NONE else None
        described = {
            "error_code": error,
            "error_message": None,
            "group_id": group_id,
            "group_state": "Dead",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "members": [],
        }
        if error == NONE and not is_consumer_group(group):
            described["error_code"] = GROUP_ID_NOT_FOUND
            described["error_message"] = (
                f"Group {group_id} not found."
                if group is None
                else f"Group {group_id} is not a consumer group."
            )
        if described["error_code"] != NONE:
            return described
        names = {meta.topic_id: name for name, meta in self.broker.coordinator.topics().items()}

        def described_assignment(assignment):
            return {
                "topic_partitions": [
                    {
                        "topic_id": uuid.UUID(hex=t),
                        "topic_name": names.get(t, ""),
                        "partitions": sorted(ps),
                    }
                    for t, ps in sorted(assignment.items())
                ]
            }

        described.update(
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor_name or self._consumer_config()[0][0],
            members=[
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": described_assignment(m.assigned),
                    "target_assignment": described_assignment(group.target.get(m.member_id, {})),
                    "member_type": CLASSIC_MEMBER if m.uses_classic() else CONSUMER_MEMBER,
                }
                for m in group.members.values()
            ],
        )
        return described

    # -- offsets of consumer groups ---------------------------------------------

    def consumer_commit_error(self, group, member_epoch, member_id):
        """Kafka's ``ConsumerGroup.validateOffsetCommit``."""
        if member_epoch < 0 and not member_id:
            # An admin or assign() commit: allowed while nobody consumes.
            return NONE if not group.members else UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # A classic member's generation is its member epoch (KIP-1099).
            return ILLEGAL_GENERATION if member.uses_classic() else STALE_MEMBER_EPOCH
        return NONE

    def fetch_member_error(self, group_id, member_id, member_epoch):
        """OffsetFetch v9's member check on consumer groups."""
        group = self.groups.get(group_id)
        if not is_consumer_group(group) or (member_id is None and member_epoch < 0):
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return NONE if member_epoch == member.member_epoch else STALE_MEMBER_EPOCH

    def consumer_group_tombstones(self, group):
        records = []
        for member_id in list(group.members):
            records += member_tombstones(group.group_id, member_id)
        return records + group_tombstones(group.group_id)
