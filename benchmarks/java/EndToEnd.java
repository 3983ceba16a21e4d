import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * End-to-end delay with Kafka's Java clients: a KafkaProducer sends RATE records a second
 * (client defaults but acks) for WARMUP then SECONDS seconds, and a KafkaConsumer in the
 * same JVM, assigned at every partition's log end, polls them. Each value starts with the
 * producer's System.nanoTime() at send(), so a delay is one clock's difference, in the
 * order of arrival. Prints "records N p50 X p99 Y p99.9 Z" (ms) over the records sent
 * after the warm-up.
 *
 * With TRACE, each measured record's partition, offset, send and arrival times (ns) are
 * written there, a line each, for benchmarks/hops.py to follow through the servers.
 *
 * usage: EndToEnd BOOTSTRAP TOPIC RATE SECONDS WARMUP SIZE ACKS [TRACE]
 */
public class EndToEnd {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], acks = args[6];
        int rate = Integer.parseInt(args[2]);
        double seconds = Double.parseDouble(args[3]), warmup = Double.parseDouble(args[4]);
        int size = Math.max(8, Integer.parseInt(args[5]));

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("enable.auto.commit", "false");
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
            c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        List<TopicPartition> partitions = new ArrayList<>();
        for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60)))
            partitions.add(new TopicPartition(topic, p.partition()));
        consumer.assign(partitions);
        consumer.seekToEnd(partitions);
        for (TopicPartition tp : partitions) consumer.position(tp, Duration.ofSeconds(60));

        long total = (long) (rate * (warmup + seconds));
        long measuredFrom = (long) (rate * warmup);   // the first measured record's number
        long[] delays = new long[(int) (total - measuredFrom)];
        String trace = args.length > 7 ? args[7] : null;
        int[] tracedPartitions = new int[trace == null ? 0 : delays.length];
        long[] tracedOffsets = new long[tracedPartitions.length];
        long[] tracedSent = new long[tracedPartitions.length];
        long[] tracedArrived = new long[tracedPartitions.length];
        int[] count = {0};
        AtomicLong seen = new AtomicLong();   // read by the main thread as it waits
        AtomicBoolean stop = new AtomicBoolean();
        Thread reader = new Thread(() -> {
            while (!stop.get()) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                    long now = System.nanoTime();
                    ByteBuffer v = ByteBuffer.wrap(r.value());
                    long sent = v.getLong(0), number = v.getLong(8);
                    seen.incrementAndGet();
                    if (number >= measuredFrom && count[0] < delays.length) {
                        if (trace != null) {
                            tracedPartitions[count[0]] = r.partition();
                            tracedOffsets[count[0]] = r.offset();
                            tracedSent[count[0]] = sent;
                            tracedArrived[count[0]] = now;
                        }
                        delays[count[0]++] = now - sent;
                    }
                }
            }
        });
        reader.start();

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", acks);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
            p, new ByteArraySerializer(), new ByteArraySerializer());
        long interval = 1_000_000_000L / rate, start = System.nanoTime();
        for (long i = 0; i < total; i++) {
            long due = start + i * interval;
            long wait = due - System.nanoTime();
            if (wait > 0) LockSupport.parkNanos(wait);
            byte[] value = new byte[Math.max(16, size)];
            ByteBuffer.wrap(value).putLong(0, System.nanoTime()).putLong(8, i);
            producer.send(new ProducerRecord<>(topic, value));
        }
        producer.flush();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (seen.get() < total && System.nanoTime() < deadline) Thread.sleep(10);
        stop.set(true);
        reader.join();
        producer.close();
        consumer.close();

        if (trace != null) {
            try (java.io.PrintWriter out = new java.io.PrintWriter(
                     new java.io.BufferedWriter(new java.io.FileWriter(trace)))) {
                for (int i = 0; i < count[0]; i++)
                    out.printf("%d %d %d %d%n", tracedPartitions[i], tracedOffsets[i],
                               tracedSent[i], tracedArrived[i]);
            }
        }
        long[] got = Arrays.copyOf(delays, count[0]);
        Arrays.sort(got);
        if (got.length == 0) {
            System.out.println("records 0");
            return;
        }
        System.out.printf("records %d p50 %.3f p99 %.3f p99.9 %.3f%n", got.length,
                          got[(int) (got.length * 0.5)] / 1e6, got[(int) (got.length * 0.99)] / 1e6,
                          got[(int) (got.length * 0.999)] / 1e6);
    }
}
