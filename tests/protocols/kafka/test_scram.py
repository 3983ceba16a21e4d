"""SCRAM on the broker's side (``protocols.kafka.scram``): RFC 7677's SCRAM-SHA-256 example
exchange byte for byte (Kafka's ScramFormatterTest uses the same), a SCRAM-SHA-512 exchange
with a client computed here from RFC 5802's definitions, and Kafka's ScramSaslServer
refusals."""
import base64
import hashlib
import hmac

import pytest

from protocols.kafka.scram import ScramError, ScramServer, credential, salted_password

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def rfc7677_server():
    stored = credential("SCRAM-SHA-256",
                        salted_password("SCRAM-SHA-256", "pencil", RFC7677_SALT, 4096),
                        RFC7677_SALT, 4096)
    return ScramServer("SCRAM-SHA-256", {"user": stored}.get, SERVER_NONCE)


def test_rfc_7677_example():
    server = rfc7677_server()
    assert server.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == \
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==," \
        b"i=4096"
    assert server.client_final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == \
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


def client_final(mechanism_hash: str, password: str, first_bare: str, server_first: bytes,
                 iterations: int, salt: bytes) -> bytes:
    """The client's side (RFC 5802, section 3)."""
    nonce = server_first.decode().split(",")[0][2:]
    salted = hashlib.pbkdf2_hmac(mechanism_hash, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", mechanism_hash).digest()
    stored_key = hashlib.new(mechanism_hash, client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, mechanism_hash).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("password, ok", [("s3cret", True), ("guess", False)])
def test_a_scram_sha_512_exchange(password, ok):
    salt = b"0123456789abcdef"
    stored = credential("SCRAM-SHA-512", salted_password("SCRAM-SHA-512", "s3cret", salt,
                                                         8192), salt, 8192)
    server = ScramServer("SCRAM-SHA-512", {"a,b=c": stored}.get, "srv")
    first_bare = "n=a=2Cb=3Dc,r=cli"
    server_first = server.client_first(f"n,,{first_bare}".encode())
    final = client_final("sha512", password, first_bare, server_first, 8192, salt)
    if ok:
        assert server.client_final(final).startswith(b"v=") and server.user == "a,b=c"
    else:
        with pytest.raises(ScramError, match="Invalid client credentials"):
            server.client_final(final)
        assert not server.complete


def test_refusals_as_kafkas_scram_sasl_server():
    server = rfc7677_server()
    with pytest.raises(ScramError, match="Authentication failed: Invalid user credentials"):
        server.client_first(b"n,,n=nobody,r=abc")
    with pytest.raises(ScramError, match="Invalid SCRAM client first message format"):
        rfc7677_server().client_first(b"p=tls-unique,,n=user,r=abc")   # channel binding
    with pytest.raises(ScramError, match="authorization id that is different") as e:
        rfc7677_server().client_first(b"n,a=admin,n=user,r=abc")
    assert e.value.to_client
    server = rfc7677_server()
    server.client_first(b"n,,n=user,r=abc")
    with pytest.raises(ScramError, match="Invalid client nonce"):
        server.client_final(b"c=biws,r=abcOTHER,p=AAAA")
    weak = credential("SCRAM-SHA-256", b"x" * 32, b"salt", 1000)
    with pytest.raises(ScramError, match="Iterations 1000 is less than the minimum 4096"):
        ScramServer("SCRAM-SHA-256", {"u": weak}.get, "n").client_first(b"n,,n=u,r=abc")


def test_delegation_tokens_are_refused_and_the_nonce_must_be_the_servers_whole():
    with pytest.raises(ScramError, match="delegation tokens are not supported") as e:
        rfc7677_server().client_first(b"n,,n=user,r=abc,tokenauth=true")
    assert e.value.to_client
    server = rfc7677_server()
    server.client_first(b"n,,n=user,r=ab")
    with pytest.raises(ScramError, match="Invalid client nonce"):
        server.client_final(f"c=biws,r=ab{SERVER_NONCE}x,p=AAAA".encode())


def test_the_client_side_of_rfc_7677_example():
    """rafka's own clients (the Ray door) sign in with ScramClient: RFC 7677's client
    messages byte for byte, and the server's signature checked."""
    from protocols.kafka.scram import ScramClient
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server = rfc7677_server()
    final = client.final(server.client_first(client.first()))
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(server.client_final(final))
    with pytest.raises(ScramError, match="server signature"):
        client.verify(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("server_first, error", [
    (b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "server first"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024", "minimum 4096"),
])
def test_the_client_refuses_a_server_first_message(server_first, error):
    from protocols.kafka.scram import ScramClient
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(ScramError, match=error):
        client.final(server_first)
