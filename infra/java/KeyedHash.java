package kafkalake.jobs;

import java.security.GeneralSecurityException;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The keyed hash (HMAC-SHA256 as lower-case hex, {@code kafkalake.personal.PseudonymKey.digest}) of a binary value,
 * as a Spark function ({@code spark_jobs.keyed_hash}). The key is a field of this object: it reaches the executors
 * inside the serialized task, never as a literal of the plan, which names the function only. Neither
 * {@link #toString} nor any message this class throws holds the key.
 */
public final class KeyedHash implements UDF1<byte[], String> {
    private static final long serialVersionUID = 1L;
    private static final String ALGORITHM = "HmacSHA256";
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** How plans name the function. */
    public static final String NAME = "keyed_hash";

    private final byte[] key;
    private transient ThreadLocal<Mac> macs;

    private KeyedHash(byte[] key) {
        this.key = key.clone();
    }

    /**
     * The function under {@code key}. Built here, not through py4j, so that the Java-UDF overload of
     * {@code functions.udf} is the one chosen (it knows its input type and passes a null through as null).
     */
    public static UserDefinedFunction function(byte[] key) {
        return functions.udf(new KeyedHash(key), DataTypes.StringType).withName(NAME);
    }

    @Override
    public String call(byte[] value) {
        if (value == null) {
            return null;
        }
        byte[] digest = mac().doFinal(value);
        char[] hex = new char[digest.length * 2];
        for (int i = 0; i < digest.length; i++) {
            hex[2 * i] = HEX[(digest[i] >> 4) & 0xF];
            hex[2 * i + 1] = HEX[digest[i] & 0xF];
        }
        return new String(hex);
    }

    /** One initialised Mac per thread (a Mac is not thread-safe; making one per row would cost more than the hash). */
    private Mac mac() {
        ThreadLocal<Mac> local = macs;
        if (local == null) {
            local = ThreadLocal.withInitial(this::newMac);
            macs = local;
        }
        return local.get();
    }

    private Mac newMac() {
        try {
            Mac mac = Mac.getInstance(ALGORITHM);
            mac.init(new SecretKeySpec(key, ALGORITHM));
            return mac;
        } catch (GeneralSecurityException e) {
            // The cause is left out: a provider's message could describe the key.
            throw new IllegalStateException(ALGORITHM + " is unavailable: " + e.getClass().getName());
        }
    }

    @Override
    public String toString() {
        return "KeyedHash";
    }
}
