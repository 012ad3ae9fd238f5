package kafkalake.local;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerExtensionsValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The local broker's stand-in for Amazon MSK's IAM access control: an OAUTHBEARER server callback handler that
 * accepts only a token made the way MSK's signers make it (aws-msk-iam-sasl-signer-python, and the OAUTHBEARER
 * handler of software.amazon.msk:aws-msk-iam-auth): the base64url (unpadded) form of a SigV4-presigned
 * {@code GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect&X-Amz-...} request.
 *
 * <p>The signature is recomputed as botocore's {@code SigV4QueryAuth} and the AWS SDK's {@code Aws4Signer.presign}
 * compute it: the canonical request is
 * <pre>
 * GET
 * /                                   (the URL's path; an empty one is "/")
 * canonical query                     (every query parameter but X-Amz-Signature and User-Agent, which both signers
 *                                      append after signing; each name and value percent-decoded then encoded as
 *                                      RFC 3986 (unreserved characters kept, "%XX" upper case), sorted by name then
 *                                      value, "name=value" joined by "&amp;"; X-Amz-Security-Token included)
 * host:kafka.&lt;region&gt;.amazonaws.com   (the URL's host, its port too unless 443)
 * (empty line)
 * host                                (the signed headers: X-Amz-SignedHeaders must be "host")
 * e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855   (SHA-256 of the empty body)
 * </pre>
 * then signed with SigV4's key chain of the secret the JAAS options hold for the token's access key, for the
 * credential scope's date, region and service; the signatures are compared in constant time. The token must also
 * be for this cluster's region (host and credential scope), for the action {@code kafka-cluster:Connect}, with the
 * algorithm AWS4-HMAC-SHA256, not expired ({@code X-Amz-Date} + {@code X-Amz-Expires}) nor signed in the future
 * beyond a small clock skew.
 *
 * <p>An accepted token's principal is the signing role: the access key without the role prefix
 * ({@code principal-archiver} is {@code archiver}; a key without the prefix is itself), so Kafka's ACLs on
 * {@code User:<role>} decide per topic and group, as IAM policies do on MSK. Its lifetime is the token's expiry.
 * A refused one fails the SASL exchange at once with the reason as the error status (expired, region, action,
 * signature...).
 *
 * <p>JAAS options of the listener's {@code OAuthBearerLoginModule} entry: {@code region} (required), {@code secret}
 * (the secret key of every access key), {@code secret.<access key>} (one key's own secret, before {@code secret}),
 * {@code principalPrefix} (default {@code principal-}), {@code clockSkewSeconds} (default 60), {@code lifetimeSeconds}
 * (a token counts as expired that many seconds after its signing, when sooner than its {@code X-Amz-Expires}: MSK's
 * signers sign for 900 s, and a listener of short-lived tokens shows that reads outlive them in seconds, not
 * minutes). Each accepted token is logged at INFO with its principal and expiry.
 *
 * <p>{@code main(region, secret[, lifetimeSeconds])} checks the tokens on standard input, one a line, through the
 * same callbacks, and prints {@code accepted <principal> <startMs> <lifetimeMs>} or {@code refused <reason>} for each.
 *
 * <p>Past 400 lines on purpose: SigV4's canonical request, the token's checks in order and the stdin harness the
 * unit test drives are one check, each step with the reason a token is refused.
 */
public class MskIamValidator implements AuthenticateCallbackHandler {
    public static final String ACTION = "kafka-cluster:Connect";
    public static final String SERVICE = "kafka-cluster";
    public static final String ALGORITHM = "AWS4-HMAC-SHA256";
    static final String EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    static final String SIGNATURE = "X-Amz-Signature";
    static final Set<String> UNSIGNED = Set.of(SIGNATURE.toLowerCase(Locale.ROOT), "user-agent");
    static final long MAX_EXPIRES_SECONDS = 604800;
    static final Pattern HOST = Pattern.compile("kafka(?:-serverless)?\\.([a-z0-9-]+)\\.amazonaws\\.com");
    static final Pattern HEX_SIGNATURE = Pattern.compile("[0-9a-f]{64}");
    static final DateTimeFormatter AMZ_DATE = DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'");
    private static final Logger LOG = LoggerFactory.getLogger(MskIamValidator.class);

    private String region;
    private String defaultSecret;
    private final Map<String, String> secrets = new HashMap<>();
    private String principalPrefix = "principal-";
    private long clockSkewMs = 60_000;
    private long lifetimeMs = Long.MAX_VALUE;

    /** Why a token was refused: the SASL error status the client sees. */
    static final class Refused extends Exception {
        Refused(String reason) {
            super(reason, null, false, false);
        }
    }

    @Override
    public void configure(Map<String, ?> configs, String saslMechanism, List<AppConfigurationEntry> jaasConfigEntries) {
        if (!OAuthBearerLoginModule.OAUTHBEARER_MECHANISM.equals(saslMechanism)) {
            throw new IllegalArgumentException("MskIamValidator validates OAUTHBEARER, not " + saslMechanism);
        }
        Map<String, ?> options = jaasConfigEntries.stream()
                .filter(e -> OAuthBearerLoginModule.class.getName().equals(e.getLoginModuleName()))
                .findFirst()
                .<Map<String, ?>>map(AppConfigurationEntry::getOptions)
                .orElseThrow(() -> new IllegalArgumentException("no OAuthBearerLoginModule entry in the JAAS config"));
        for (Map.Entry<String, ?> option : options.entrySet()) {
            String name = option.getKey();
            String value = String.valueOf(option.getValue());
            if (name.equals("region")) {
                region = value;
            } else if (name.equals("secret")) {
                defaultSecret = value;
            } else if (name.startsWith("secret.")) {
                secrets.put(name.substring("secret.".length()), value);
            } else if (name.equals("principalPrefix")) {
                principalPrefix = value;
            } else if (name.equals("clockSkewSeconds")) {
                clockSkewMs = Long.parseLong(value) * 1000;
            } else if (name.equals("lifetimeSeconds")) {
                lifetimeMs = Long.parseLong(value) * 1000;
            }
        }
        if (region == null || region.isEmpty()) {
            throw new IllegalArgumentException("MskIamValidator needs the JAAS option region");
        }
        if (defaultSecret == null && secrets.isEmpty()) {
            throw new IllegalArgumentException("MskIamValidator needs the JAAS option secret (or secret.<access key>)");
        }
    }

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (callback instanceof OAuthBearerValidatorCallback) {
                OAuthBearerValidatorCallback validation = (OAuthBearerValidatorCallback) callback;
                try {
                    validation.token(validate(validation.tokenValue(), System.currentTimeMillis()));
                } catch (Refused refused) {
                    LOG.info("MSK IAM token refused: {}", refused.getMessage());
                    validation.error(refused.getMessage(), null, null);
                }
            } else if (callback instanceof OAuthBearerExtensionsValidatorCallback) {
                // MSK's signers send none; any a client adds carry no authority here and are accepted as sent
                OAuthBearerExtensionsValidatorCallback extensions = (OAuthBearerExtensionsValidatorCallback) callback;
                extensions.inputExtensions().map().keySet().forEach(extensions::valid);
            } else {
                throw new UnsupportedCallbackException(callback);
            }
        }
    }

    @Override
    public void close() {}

    /** The accepted token of {@code value} at {@code nowMs}, or why it is refused. */
    OAuthBearerToken validate(String value, long nowMs) throws Refused {
        if (value == null || value.isEmpty()) {
            throw new Refused("no token");
        }
        URI url;
        try {
            url = new URI(new String(Base64.getUrlDecoder().decode(value), StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            throw new Refused("token is not base64url");
        } catch (URISyntaxException e) {
            throw new Refused("token is not a presigned URL");
        }
        if (!"https".equals(url.getScheme()) || url.getHost() == null) {
            throw new Refused("token is not a presigned https URL");
        }
        Matcher host = HOST.matcher(url.getHost());
        if (!host.matches()) {
            throw new Refused("token is signed for host " + url.getHost() + ", not kafka." + region + ".amazonaws.com");
        }
        if (!host.group(1).equals(region)) {
            throw new Refused("token is for region " + host.group(1) + ", this cluster is in " + region);
        }
        List<String[]> query = query(url.getRawQuery());
        Map<String, String> params = new HashMap<>();
        for (String[] pair : query) {
            if (params.put(pair[0], pair[1]) != null) {
                throw new Refused("query parameter " + pair[0] + " appears twice");
            }
        }
        String action = required(params, "Action");
        if (!ACTION.equals(action)) {
            throw new Refused("token is for action " + action + ", not " + ACTION);
        }
        String algorithm = required(params, "X-Amz-Algorithm");
        if (!ALGORITHM.equals(algorithm)) {
            throw new Refused("signing algorithm " + algorithm + " is not " + ALGORITHM);
        }
        String[] scope = required(params, "X-Amz-Credential").split("/", -1);
        if (scope.length != 5 || scope[0].isEmpty() || !"aws4_request".equals(scope[4])) {
            throw new Refused("X-Amz-Credential is not <access key>/<date>/<region>/<service>/aws4_request");
        }
        String accessKey = scope[0];
        if (!scope[2].equals(region)) {
            throw new Refused("token is signed for region " + scope[2] + ", this cluster is in " + region);
        }
        if (!SERVICE.equals(scope[3])) {
            throw new Refused("token is signed for service " + scope[3] + ", not " + SERVICE);
        }
        if (!"host".equals(required(params, "X-Amz-SignedHeaders"))) {
            throw new Refused("signed headers are " + params.get("X-Amz-SignedHeaders") + ", not host");
        }
        String amzDate = required(params, "X-Amz-Date");
        long signedMs;
        try {
            signedMs = LocalDateTime.parse(amzDate, AMZ_DATE).toInstant(ZoneOffset.UTC).toEpochMilli();
        } catch (DateTimeParseException e) {
            throw new Refused("X-Amz-Date " + amzDate + " is not yyyyMMddTHHmmssZ");
        }
        if (!amzDate.startsWith(scope[1]) || scope[1].length() != 8) {
            throw new Refused("credential scope date " + scope[1] + " is not the date of X-Amz-Date " + amzDate);
        }
        long expires;
        try {
            expires = Long.parseLong(required(params, "X-Amz-Expires"));
        } catch (NumberFormatException e) {
            throw new Refused("X-Amz-Expires is not a number of seconds");
        }
        if (expires < 1 || expires > MAX_EXPIRES_SECONDS) {
            throw new Refused("X-Amz-Expires " + expires + " is not between 1 and " + MAX_EXPIRES_SECONDS);
        }
        long validMs = Math.min(expires * 1000, lifetimeMs);
        long expiryMs = signedMs + validMs;
        if (nowMs >= expiryMs) {
            throw new Refused("token expired at " + Instant.ofEpochMilli(expiryMs) + " (signed " + amzDate
                    + ", valid " + validMs / 1000 + " s)");
        }
        if (signedMs > nowMs + clockSkewMs) {
            throw new Refused("token is signed in the future (" + amzDate + ")");
        }
        String signature = required(params, SIGNATURE);
        if (!HEX_SIGNATURE.matcher(signature).matches()) {
            throw new Refused("X-Amz-Signature is not 64 lower-case hex digits");
        }
        String secret = secrets.getOrDefault(accessKey, defaultSecret);
        if (secret == null) {
            throw new Refused("unknown access key " + accessKey);
        }
        String canonical = canonicalRequest(url, query);
        String credentialScope = scope[1] + "/" + scope[2] + "/" + scope[3] + "/aws4_request";
        String stringToSign = ALGORITHM + "\n" + amzDate + "\n" + credentialScope + "\n" + hex(sha256(canonical));
        byte[] key = hmac(("AWS4" + secret).getBytes(StandardCharsets.UTF_8), scope[1]);
        key = hmac(hmac(hmac(key, scope[2]), scope[3]), "aws4_request");
        String expected = hex(hmac(key, stringToSign));
        if (!MessageDigest.isEqual(
                expected.getBytes(StandardCharsets.US_ASCII), signature.getBytes(StandardCharsets.US_ASCII))) {
            throw new Refused("signature does not match for access key " + accessKey
                    + " (wrong secret key, or the token was altered)");
        }
        String principal = accessKey.startsWith(principalPrefix) && accessKey.length() > principalPrefix.length()
                ? accessKey.substring(principalPrefix.length())
                : accessKey;
        LOG.info("MSK IAM token accepted as User:{}, signed {}, valid {} s", principal, amzDate, validMs / 1000);
        return new Token(value, principal, signedMs, expiryMs);
    }

    /** The canonical request of the presigned GET, as the signer built it before appending the signature. */
    static String canonicalRequest(URI url, List<String[]> query) {
        List<String[]> signed = new ArrayList<>();
        for (String[] pair : query) {
            if (!UNSIGNED.contains(pair[0].toLowerCase(Locale.ROOT))) {
                signed.add(new String[] {encode(pair[0]), encode(pair[1])});
            }
        }
        signed.sort((a, b) -> a[0].equals(b[0]) ? a[1].compareTo(b[1]) : a[0].compareTo(b[0]));
        StringBuilder canonicalQuery = new StringBuilder();
        for (String[] pair : signed) {
            if (canonicalQuery.length() > 0) {
                canonicalQuery.append('&');
            }
            canonicalQuery.append(pair[0]).append('=').append(pair[1]);
        }
        String path = url.getRawPath() == null || url.getRawPath().isEmpty() ? "/" : url.getRawPath();
        String host = url.getPort() == -1 || url.getPort() == 443 ? url.getHost() : url.getHost() + ":" + url.getPort();
        return "GET\n" + path + "\n" + canonicalQuery + "\nhost:" + host + "\n\nhost\n" + EMPTY_SHA256;
    }

    private static String required(Map<String, String> params, String name) throws Refused {
        String value = params.get(name);
        if (value == null || value.isEmpty()) {
            throw new Refused("token has no " + name);
        }
        return value;
    }

    /** The query's name-value pairs, percent-decoded ("+" stays "+": both signers encode every reserved byte). */
    static List<String[]> query(String raw) throws Refused {
        if (raw == null || raw.isEmpty()) {
            return Collections.emptyList();
        }
        List<String[]> pairs = new ArrayList<>();
        for (String part : raw.split("&", -1)) {
            int equals = part.indexOf('=');
            String name = equals < 0 ? part : part.substring(0, equals);
            String value = equals < 0 ? "" : part.substring(equals + 1);
            pairs.add(new String[] {decode(name), decode(value)});
        }
        return pairs;
    }

    static String decode(String text) throws Refused {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '%') {
                if (i + 2 >= text.length()) {
                    throw new Refused("bad percent-encoding in the token's query");
                }
                int high = Character.digit(text.charAt(i + 1), 16);
                int low = Character.digit(text.charAt(i + 2), 16);
                if (high < 0 || low < 0) {
                    throw new Refused("bad percent-encoding in the token's query");
                }
                bytes.write(high * 16 + low);
                i += 2;
            } else {
                byte[] encoded = String.valueOf(c).getBytes(StandardCharsets.UTF_8);
                bytes.write(encoded, 0, encoded.length);
            }
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }

    /** RFC 3986 encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ kept, every other byte %XX (upper case). */
    static String encode(String text) {
        StringBuilder out = new StringBuilder();
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                    || c == '-' || c == '_' || c == '.' || c == '~') {
                out.append((char) c);
            } else {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
            }
        }
        return out.toString();
    }

    static byte[] sha256(String text) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    static byte[] hmac(byte[] key, String text) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            return mac.doFinal(text.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            out.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return out.toString();
    }

    /** An accepted token: its principal is the signing role, its lifetime the presigned URL's expiry. */
    static final class Token implements OAuthBearerToken {
        private final String value;
        private final String principal;
        private final long startMs;
        private final long lifetimeMs;

        Token(String value, String principal, long startMs, long lifetimeMs) {
            this.value = value;
            this.principal = principal;
            this.startMs = startMs;
            this.lifetimeMs = lifetimeMs;
        }

        @Override
        public String value() {
            return value;
        }

        @Override
        public Set<String> scope() {
            return Collections.emptySet();
        }

        @Override
        public long lifetimeMs() {
            return lifetimeMs;
        }

        @Override
        public String principalName() {
            return principal;
        }

        @Override
        public Long startTimeMs() {
            return startMs;
        }
    }

    /** Checks the tokens on standard input (one a line) for region {@code args[0]} and secret {@code args[1]}, tokens
     * counting expired {@code args[2]} seconds after signing if given. */
    public static void main(String[] args) throws Exception {
        if (args.length != 2 && args.length != 3) {
            System.err.println("usage: MskIamValidator <region> <secret> [<lifetimeSeconds>]"
                    + "  (tokens on standard input, one a line)");
            System.exit(2);
        }
        Map<String, Object> options = new HashMap<>();
        options.put("region", args[0]);
        options.put("secret", args[1]);
        if (args.length == 3) {
            options.put("lifetimeSeconds", args[2]);
        }
        MskIamValidator validator = new MskIamValidator();
        validator.configure(Collections.emptyMap(), OAuthBearerLoginModule.OAUTHBEARER_MECHANISM,
                List.of(new AppConfigurationEntry(OAuthBearerLoginModule.class.getName(),
                        AppConfigurationEntry.LoginModuleControlFlag.REQUIRED, options)));
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = lines.readLine(); line != null; line = lines.readLine()) {
            OAuthBearerValidatorCallback callback = new OAuthBearerValidatorCallback(line.trim());
            validator.handle(new Callback[] {callback});
            OAuthBearerToken token = callback.token();
            System.out.println(token == null
                    ? "refused " + callback.errorStatus()
                    : "accepted " + token.principalName() + " " + token.startTimeMs() + " " + token.lifetimeMs());
        }
        System.out.flush();
    }
}
