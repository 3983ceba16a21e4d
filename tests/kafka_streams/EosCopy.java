// A Kafka Streams application with processing.guarantee=exactly_once_v2, run by
// tests/runtime/test_kafka_streams.py against rafka's Kafka listener: it reads <in>, tags
// each value with its source partition and offset, and writes it to <out>, keyed as it
// came. Arguments: bootstrap servers, application id, input topic, output topic, state dir.
// It runs until killed; it prints one line per state change to stdout ("STATE <state>").
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.processor.api.ContextualFixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

public class EosCopy {
    static class Tag extends ContextualFixedKeyProcessor<byte[], byte[], byte[]> {
        @Override
        public void process(FixedKeyRecord<byte[], byte[]> record) {
            var meta = context().recordMetadata().orElseThrow();
            String tagged = new String(record.value()) + "@" + meta.partition() + ":" + meta.offset();
            context().forward(record.withValue(tagged.getBytes()));
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // Faults resolve within the test: a lost member leaves the group within seconds.
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 20000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], byte[]>stream(args[2]).processValues(Tag::new).to(args[3]);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("ERROR " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
