"""pulsar-bruce: a local datagram forwarder into Apache Pulsar.

Data flow, one package per stage: ``input`` (UNIX socket) -> ``parse``
(Bruce datagrams) -> ``route`` (topic, partition) -> ``batch`` (Pulsar batch
payloads) -> ``frame`` (wire codec) -> ``connection`` (brokers) ->
``producer`` (pending queue, receipts).  ``server`` wires them together.
"""

__version__ = "0.1.0"
