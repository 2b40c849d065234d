"""Light message classes for the packet loop, derived from the ``perfetto`` package's protos.

They declare only the TracePacket and TrackEvent fields the reader looks at, so the C parser skips
everything else without making Python objects, and they declare ``debug_annotations`` as raw
bytes for the vectorised decoder in :mod:`traceanalyzer.ingest.perfetto.annotations`.
"""

from __future__ import annotations

from typing import Any

_LIGHT: dict[str, Any] = {}

#: Fields of TracePacket and TrackEvent the reader looks at. Everything else is skipped by the C
#: parser without ever becoming a Python object.
_PACKET_FIELDS = (
    "timestamp", "timestamp_clock_id", "track_event", "track_descriptor", "clock_snapshot",
    "trusted_packet_sequence_id", "interned_data", "sequence_flags", "incremental_state_cleared",
    "trace_packet_defaults", "previous_packet_dropped", "compressed_packets",
)
_EVENT_FIELDS = (
    "category_iids", "categories", "name_iid", "name", "type", "track_uuid", "counter_value",
    "double_counter_value", "extra_counter_track_uuids", "extra_counter_values",
    "extra_double_counter_track_uuids", "extra_double_counter_values", "flow_ids_old", "flow_ids",
    "terminating_flow_ids_old", "terminating_flow_ids", "correlation_id", "debug_annotations",
    "legacy_event",
)


def light_classes() -> tuple[Any, Any]:
    """``Trace``/``TracePacket`` look-alikes that keep only the fields we read.

    They are built from the ``perfetto`` package's own descriptors, with two changes: fields we do
    not read are left out (the parser skips them in C), and ``debug_annotations`` is declared as
    ``bytes`` so that annotations stay raw for :mod:`traceanalyzer.ingest.perfetto.wire`.
    """
    if not _LIGHT:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as real

        source = descriptor_pb2.FileDescriptorProto()
        real.DESCRIPTOR.CopyToProto(source)
        messages = {m.name: m for m in source.message_type}
        light = descriptor_pb2.FileDescriptorProto(
            name="traceanalyzer/perfetto_light.proto",
            package="traceanalyzer.perfetto_light",
            dependency=[real.DESCRIPTOR.name],
        )
        for name, keep in (("TracePacket", _PACKET_FIELDS), ("TrackEvent", _EVENT_FIELDS)):
            msg = light.message_type.add(name=name)
            for f in messages[name].field:
                if f.name not in keep:
                    continue
                copy = msg.field.add()
                copy.CopyFrom(f)
                copy.ClearField("oneof_index")
                copy.ClearField("json_name")
                if f.name == "debug_annotations":
                    copy.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    copy.ClearField("type_name")
                elif f.name == "type":
                    copy.type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
                    copy.ClearField("type_name")
                elif f.name == "track_event":
                    copy.type_name = ".traceanalyzer.perfetto_light.TrackEvent"
        trace = light.message_type.add(name="Trace")
        trace.field.add(
            name="packet",
            number=1,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            type_name=".traceanalyzer.perfetto_light.TracePacket",
        )
        pool = descriptor_pool.Default()
        try:
            fd = pool.FindFileByName(light.name)
        except KeyError:
            fd = pool.Add(light)
            fd = pool.FindFileByName(light.name)
        _LIGHT["trace"] = message_factory.GetMessageClass(fd.message_types_by_name["Trace"])
        _LIGHT["annotation"] = real.DebugAnnotation
    return _LIGHT["trace"], _LIGHT["annotation"]
