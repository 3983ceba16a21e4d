"""What a Ray door client may do on a replica host's channel (``actors.replica.door_guard``):
Kafka's checks for Produce, Fetch and ListOffsets, partition by partition, answers in the
request's order."""
from protocols.errors import (TopicAuthorizationFailedError,
                              TransactionalIdAuthorizationFailedError)
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocols.messages import (FetchManyRequest, FetchManyResponse, FetchRequest,
                                FetchResult, ProduceManyRequest, ProduceResult)
from actors.replica.door_guard import guard_fetch, guard_list_offsets, guard_produce

TOPIC = ResourceType.TOPIC


def allowing(*grants):
    return lambda op, rt, name: (op, rt, name) in grants


def test_produce_goes_on_for_the_topics_it_may_write_and_is_refused_for_the_others():
    request = ProduceManyRequest(-1, 30_000, (("a", 0, b"r0"), ("b", 0, b"r1"), ("a", 1, b"r2")))
    allowed, merge = guard_produce(request, allowing((AclOperation.WRITE, TOPIC, "a")))
    assert allowed.partitions == (("a", 0, b"r0"), ("a", 1, b"r2"))
    answers = merge([("a", 0, ProduceResult(5)), ("a", 1, ProduceResult(7))])
    assert [(t, p) for t, p, _ in answers] == [("a", 0), ("b", 0), ("a", 1)]
    assert answers[0][2].base_offset == 5 and answers[2][2].base_offset == 7
    assert isinstance(answers[1][2].error, TopicAuthorizationFailedError)


def test_produce_refused_everywhere_goes_nowhere():
    request = ProduceManyRequest(-1, 30_000, (("b", 0, b"r"),))
    allowed, merge = guard_produce(request, allowing())
    assert allowed is None
    assert isinstance(merge([])[0][2].error, TopicAuthorizationFailedError)


def test_a_transactional_producer_needs_write_on_its_transactional_id():
    request = ProduceManyRequest(-1, 30_000, (("a", 0, b"r"), ("a", 1, b"r")), "tx-1")
    write_a = (AclOperation.WRITE, TOPIC, "a")
    allowed, merge = guard_produce(request, allowing(write_a))
    assert allowed is None
    assert all(isinstance(r.error, TransactionalIdAuthorizationFailedError)
               for _, _, r in merge([]))
    allowed, _ = guard_produce(request, allowing(
        write_a, (AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx-1")))
    assert allowed == request


def fetch_request(replica_id: int = -1, regions: str = "",
                  partition_replica_id: int = -1) -> FetchManyRequest:
    return FetchManyRequest(replica_id, 500, 1, 1 << 20,
                            (("a", 0, FetchRequest(partition_replica_id, 10)),
                             ("b", 0, FetchRequest(-1, 20))),
                            regions_on_node=regions)


def test_a_fetch_answers_records_only_for_the_topics_it_may_read():
    """Checked on the answer: an incremental fetch session's answer carries partitions its
    request did not name."""
    allowed, check = guard_fetch(fetch_request(regions="node-1"),
                                 allowing((AclOperation.READ, TOPIC, "a")))
    assert allowed.regions_on_node == ""          # bytes, never a file region
    answer = check(FetchManyResponse((
        ("a", 0, FetchResult(b"records-a", 99, fetch_offset=10, leader_epoch=3)),
        ("b", 0, FetchResult(b"records-b", 99, fetch_offset=20, leader_epoch=4))),
        session_id=7))
    (_, _, a), (_, _, b) = answer.results
    assert a.records == b"records-a" and answer.session_id == 7
    assert b.records == b"" and isinstance(b.error, TopicAuthorizationFailedError)
    assert (b.fetch_offset, b.leader_epoch) == (20, 4)


def test_a_followers_fetch_needs_cluster_action():
    for request in fetch_request(replica_id=2), fetch_request(partition_replica_id=2):
        allowed, check = guard_fetch(request, allowing((AclOperation.READ, TOPIC, "a")))
        assert allowed is None
        assert all(isinstance(r.error, TopicAuthorizationFailedError)
                   for _, _, r in check(None).results)
    allowed, _ = guard_fetch(fetch_request(replica_id=2), allowing(
        (AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)))
    assert allowed is not None and allowed.replica_id == 2


def test_list_offsets_needs_describe():
    requests = [("a", 0, -1, -1, 0), ("b", 0, -1, -1, 0), ("a", 1, -2, -1, 0)]
    kept, merge = guard_list_offsets(requests, allowing((AclOperation.DESCRIBE, TOPIC, "a")))
    assert kept == [requests[0], requests[2]]
    answers = merge([b"first", b"third"], lambda e: type(e).__name__.encode())
    assert answers == [b"first", b"TopicAuthorizationFailedError", b"third"]
