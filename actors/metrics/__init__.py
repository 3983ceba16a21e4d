"""Kafka's broker metrics, exported through Ray's metrics API: what is counted where
(``broker_topic_stats``, ``request_metrics``), the gauges read off the metadata image
(``gauges``), all pure; the Ray metric objects (``exporter``)."""
