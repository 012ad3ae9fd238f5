package kafkalake.local;

import com.amazonaws.auth.AWSCredentials;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.auth.BasicAWSCredentials;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkContext$;
import org.apache.spark.TaskContext;
import scala.Option;

/**
 * S3A's credentials in a local Spark session: moto's test key, named after the pipeline principal whose Spark job
 * makes the request (the Spark local property {@code kafkalake.principal}, set by kafkalake_dev.local.principals),
 * so the local endpoint records S3A's calls with the principal they run as. Credentials are resolved per request.
 */
public class PrincipalCredentials implements AWSCredentialsProvider {
    static final String PROPERTY = "kafkalake.principal";
    static final String SECRET = "testing";

    @Override
    public AWSCredentials getCredentials() {
        String principal = null;
        TaskContext task = TaskContext.get();
        if (task != null) {
            principal = task.getLocalProperty(PROPERTY);
        } else {
            Option<SparkContext> active = SparkContext$.MODULE$.getActive();
            if (active.isDefined()) {
                principal = active.get().getLocalProperty(PROPERTY);
            }
        }
        String key = principal == null || principal.isEmpty() ? SECRET : "principal-" + principal;
        return new BasicAWSCredentials(key, SECRET);
    }

    @Override
    public void refresh() {}
}
