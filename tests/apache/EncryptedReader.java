// The Java client's consumer (MessageCryptoBc) reading an encrypted topic: one line
// "MSG <length> <sha-256 hex>" per message, in order, until COUNT or a receive times out.
// Run as a single-file program on the Apache Pulsar test classpath (tests/apache/test_encryption.py):
//   java -cp CLASSPATH EncryptedReader.java URL TOPIC KEY_NAME PRIVATE_KEY_PEM COUNT TIMEOUT_S

import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.impl.DefaultCryptoKeyReader;

public class EncryptedReader {
    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1], keyName = args[2], privateKey = args[3];
        int count = Integer.parseInt(args[4]), timeoutSeconds = Integer.parseInt(args[5]);
        DefaultCryptoKeyReader keys =
                DefaultCryptoKeyReader.builder().privateKey(keyName, "file://" + privateKey).build();
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build();
                Consumer<byte[]> consumer = client.newConsumer()
                        .topic(topic)
                        .subscriptionName("java-reader")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .cryptoKeyReader(keys)
                        .subscribe()) {
            for (int i = 0; i < count; i++) {
                Message<byte[]> message = consumer.receive(timeoutSeconds, TimeUnit.SECONDS);
                if (message == null) {
                    break;
                }
                byte[] digest = MessageDigest.getInstance("SHA-256").digest(message.getValue());
                System.out.println("MSG " + message.getValue().length + " " + HexFormat.of().formatHex(digest));
                consumer.acknowledge(message);
            }
        }
    }
}
