"""The ceiling of a Kafka client producing on this machine, for ``load/bench_kafka.py``.

confluent-kafka driven from Python spends CPU of its own per record (the Python call, the
librdkafka threads) on the same two cores as the broker. This bare Kafka server does nothing
else: it answers ApiVersions, Metadata (itself, every topic of 3 partitions), InitProducerId
and Produce (success, offsets counted, the records neither read nor kept), with
broker/kafka/wire.py's codec. Measured in the same run as the real Kafka port, it shows how
fast that client could produce here whatever a broker does with the records.

    python -m load.kafka_ceiling --dir DIR  (the server; its address goes into DIR's ready
    file, as a broker's does: lib/process.py)
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from broker.kafka import wire
from lib.process import write_ready
from load.bare_server import BareServer

PARTITIONS = 3
SERVED = {18: (0, 3), 3: (0, 12), 22: (0, 4), 0: (3, 9)}


def _answer(request, host: str, port: int, offsets: dict) -> object | None:
    key = request.API_KEY
    if key == 18:
        return ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in SERVED.items()])
    if key == 3:
        Topic = MetadataResponse.MetadataResponseTopic
        names = [t.name for t in request.topics or ()]
        return MetadataResponse(
            throttle_time_ms=0, cluster_id="ceiling", controller_id=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host=host, port=port,
                                                             rack=None)],
            topics=[Topic(error_code=0, name=n, is_internal=False, partitions=[
                Topic.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=0,
                                                leader_epoch=0, replica_nodes=[0],
                                                isr_nodes=[0], offline_replicas=[])
                for p in range(PARTITIONS)]) for n in names])
    if key == 22:
        return InitProducerIdResponse(error_code=0, producer_id=1, producer_epoch=0,
                                      throttle_time_ms=0)
    Part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topics = []
    for t in request.topic_data:
        parts = []
        for p in t.partition_data:
            count = int.from_bytes(bytes(p.records[57:61]), "big") if p.records else 0
            base = offsets.get((t.name, p.index), 0)
            offsets[(t.name, p.index)] = base + count
            parts.append(Part(index=p.index, error_code=0, base_offset=base,
                              log_append_time_ms=-1, log_start_offset=0, record_errors=[],
                              error_message=None))
        topics.append(ProduceResponse.TopicProduceResponse(name=t.name,
                                                           partition_responses=parts))
    return None if request.acks == 0 else ProduceResponse(responses=topics, throttle_time_ms=0)


async def _serve(root: Path) -> None:
    offsets: dict = {}

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = writer.get_extra_info("sockname")[:2]
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                payload = await reader.readexactly(size)
                key, version, correlation = wire.peek_header(payload)
                request = wire.decode_request(payload, key, version)
                response = _answer(request, host, port, offsets)
                if response is not None:
                    response.API_VERSION = version
                    writer.write(wire.encode_response(response, correlation))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    write_ready(root, {"address": f"127.0.0.1:{server.sockets[0].getsockname()[1]}"})
    await server.serve_forever()


class KafkaCeiling(BareServer):
    """The bare server as a process of its own (a broker's place), stopped by its PID."""

    def __init__(self, root: Path) -> None:
        super().__init__("load.kafka_ceiling", root)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.kafka_ceiling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, required=True, help="its ready file")
    asyncio.run(_serve(p.parse_args(argv).dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
