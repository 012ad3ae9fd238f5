"""The local broker's MSK IAM token check (``kafkalake_dev/local/java/MskIamValidator.java``) without a broker: the
class's own ``main`` runs its OAUTHBEARER validator callback on tokens made by the real signers, MSK's Python signer
(``aws-msk-iam-sasl-signer-python``, what librdkafka's ``oauth_cb`` uses) and the Java one
(``software.amazon.msk:aws-msk-iam-auth``'s OAUTHBEARER login handler, what Spark's Kafka source uses). Accepted: the
signing role is the principal and the token's expiry its lifetime, session tokens too. Refused, each with its reason:
a wrong secret key, another region, an expired token, one signed in the future, another action, an altered one."""

from __future__ import annotations

import base64
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from botocore.credentials import CredentialProvider, Credentials

from infra.assets import spark_jars
from kafkalake_dev.local.endpoints import ACCESS_KEY, DEFAULTS
from kafkalake_dev.local.stack import kafka_libs, msk_iam_validator_jar

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
REGION = DEFAULTS.region
ROLE_KEY = "principal-archiver"
JAVA_SIGNER = """
import java.util.List;
import java.util.Map;
import javax.security.auth.callback.Callback;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;
import software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler;

/** A token from aws-msk-iam-auth's OAUTHBEARER login handler, with the environment's credentials and region. */
public class SignWithJava {
    public static void main(String[] args) throws Exception {
        IAMOAuthBearerLoginCallbackHandler handler = new IAMOAuthBearerLoginCallbackHandler();
        handler.configure(Map.of(), "OAUTHBEARER", List.of(new AppConfigurationEntry(
                OAuthBearerLoginModule.class.getName(), AppConfigurationEntry.LoginModuleControlFlag.REQUIRED,
                Map.of())));
        OAuthBearerTokenCallback callback = new OAuthBearerTokenCallback();
        handler.handle(new Callback[] {callback});
        System.out.println(callback.token().value());
    }
}
"""


class Fixed(CredentialProvider):  # type: ignore[misc] # botocore has no types
    def __init__(self, access_key: str, secret_key: str, token: str | None = None) -> None:
        super().__init__()
        self.credentials = Credentials(access_key, secret_key, token)

    def load(self) -> Credentials:
        return self.credentials


def python_token(
    access_key: str = ROLE_KEY,
    secret_key: str = ACCESS_KEY,
    *,
    region: str = REGION,
    session_token: str | None = None,
    signed: datetime | None = None,
    action: str | None = None,
) -> tuple[str, int]:
    """A token of ``aws-msk-iam-sasl-signer-python`` and its expiry (ms), signed at ``signed`` (now by default) and
    for ``action`` (kafka-cluster:Connect by default: the signer's own)."""
    import botocore.auth
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    with pytest.MonkeyPatch.context() as patch:
        if signed is not None:
            at = signed.astimezone(UTC).replace(tzinfo=None)
            patch.setattr(botocore.auth, "get_current_datetime", lambda *_a, **_k: at)
        if action is not None:
            patch.setattr(MSKAuthTokenProvider, "ACTION_NAME", action)
        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
            region, Fixed(access_key, secret_key, session_token)
        )
    return str(token), int(expiry_ms)


def java_token(tmp_path: Path, access_key: str = ROLE_KEY, session_token: str | None = None) -> str:
    """A token of aws-msk-iam-auth (the jar shipped with the connectors, the AWS SDK v2 of the Iceberg AWS bundle),
    with ``access_key`` and the local secret in its environment."""
    wanted = ("aws-msk-iam-auth-", "iceberg-aws-bundle-")
    jars = [str(j) for j in spark_jars() if j.name.startswith(wanted)]
    assert len(jars) == 2, jars
    source = tmp_path / "SignWithJava.java"
    source.write_text(JAVA_SIGNER)
    env = {"PATH": "/usr/bin:/bin", "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": access_key}
    env |= {"AWS_SECRET_ACCESS_KEY": ACCESS_KEY, "HOME": str(tmp_path)}
    if session_token is not None:
        env["AWS_SESSION_TOKEN"] = session_token
    classpath = ":".join([*jars, str(kafka_libs() / "*")])
    done = subprocess.run(
        [_java(), "-cp", classpath, str(source)], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip().splitlines()[-1]


def _java() -> str:
    java = shutil.which("java")
    assert java is not None
    return java


def verdicts(
    tokens: list[str], region: str = REGION, secret: str = ACCESS_KEY, lifetime_seconds: int | None = None
) -> list[str]:
    """The validator's verdict on each token (one JVM for all): ``accepted <principal> <startMs> <lifetimeMs>`` or
    ``refused <reason>``; with ``lifetime_seconds``, as a listener whose tokens count expired that long after
    signing."""
    classpath = f"{msk_iam_validator_jar()}:{kafka_libs()}/*"
    lifetime = [] if lifetime_seconds is None else [str(lifetime_seconds)]
    done = subprocess.run(
        [_java(), "-cp", classpath, "kafkalake.local.MskIamValidator", region, secret, *lifetime],
        input="\n".join(tokens) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("accepted ", "refused "))]
    assert len(lines) == len(tokens), done.stdout + done.stderr
    return lines


def presigned_url(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def test_the_python_signers_tokens_are_accepted_as_the_signing_role_until_they_expire() -> None:
    role, role_expiry = python_token()
    plain, _ = python_token("testing")
    with_session, _ = python_token(session_token="FQoGZXIvYXdzE+session/token==")
    assert "X-Amz-Security-Token=FQoGZXIvYXdzE%2Bsession%2Ftoken%3D%3D" in presigned_url(with_session)

    found = verdicts([role, plain, with_session])

    principal, start, lifetime = found[0].removeprefix("accepted ").split()
    assert principal == "archiver"
    assert int(lifetime) == role_expiry  # the signer's own expiry: X-Amz-Date + 900 s
    assert int(lifetime) - int(start) == 900_000
    assert found[1].split()[:2] == ["accepted", "testing"]
    assert found[2].split()[:2] == ["accepted", "archiver"]


def test_the_java_signers_tokens_are_accepted_as_the_signing_role(tmp_path: Path) -> None:
    token = java_token(tmp_path)
    with_session = java_token(tmp_path, "principal-compactor", session_token="FQoGZXIvYXdzE+session/token==")
    url = presigned_url(token)
    assert url.startswith(f"https://kafka.{REGION}.amazonaws.com?Action=kafka-cluster%3AConnect&")  # no "/" path
    assert "User-Agent=aws-msk-iam-auth" in url  # appended after signing, as the Python signer's

    found = verdicts([token, with_session])

    assert [f.split()[:2] for f in found] == [["accepted", "archiver"], ["accepted", "compactor"]]


def test_a_token_is_refused_with_its_reason_for_a_wrong_secret_region_time_action_or_alteration() -> None:
    now = datetime.now(UTC)
    good, _ = python_token()
    refused = {
        "wrong secret key": python_token(secret_key="not-the-secret")[0],
        "another region": python_token(region="us-east-1")[0],
        "expired": python_token(signed=now - timedelta(minutes=16))[0],
        "signed in the future": python_token(signed=now + timedelta(minutes=5))[0],
        "another action": python_token(action="kafka-cluster:DescribeCluster")[0],
        "altered: another role's key": base64.urlsafe_b64encode(
            presigned_url(good).replace(ROLE_KEY, "principal-compactor").encode()
        )
        .decode()
        .rstrip("="),
        "not a token": "not/base64!",
    }

    found = dict(zip(refused, verdicts(list(refused.values())), strict=True))

    assert all(verdict.startswith("refused ") for verdict in found.values()), found
    assert "signature does not match for access key principal-archiver" in found["wrong secret key"]
    assert "region us-east-1, this cluster is in eu-west-1" in found["another region"]
    assert "expired at" in found["expired"]
    assert "signed in the future" in found["signed in the future"]
    assert "action kafka-cluster:DescribeCluster, not kafka-cluster:Connect" in found["another action"]
    assert "signature does not match for access key principal-compactor" in found["altered: another role's key"]
    assert "base64url" in found["not a token"]


def test_the_same_tokens_are_refused_by_a_cluster_of_another_region_or_with_another_secret() -> None:
    token, _ = python_token()
    assert verdicts([token], region="us-east-1")[0].startswith("refused token is for region eu-west-1")
    assert verdicts([token], secret="another")[0].startswith("refused signature does not match")


def test_a_listener_of_short_lived_tokens_counts_them_expired_that_long_after_signing() -> None:
    now = datetime.now(UTC)
    fresh, _ = python_token(signed=now - timedelta(seconds=2))
    old, _ = python_token(signed=now - timedelta(seconds=40))

    found = verdicts([fresh, old], lifetime_seconds=15)

    principal, start, lifetime = found[0].removeprefix("accepted ").split()
    assert principal == "archiver" and int(lifetime) - int(start) == 15_000  # not the signed 900 s
    assert found[1].startswith("refused token expired at") and "valid 15 s" in found[1], found[1]
    assert verdicts([old])[0].startswith("accepted archiver")  # the same token, on a listener honouring 900 s
