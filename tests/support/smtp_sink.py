#!/usr/bin/python3
"""A real SMTP server for the alert tests (Debian's python3-aiosmtpd): listens on 127.0.0.1, writes each message it
receives to OUTDIR/mail-N.eml (envelope sender and recipients first), and its port to OUTDIR/port once it listens.
With --tls CERT KEY it offers STARTTLS and refuses mail before it (require_starttls); with --auth USER PASSWORD too,
it requires that login (after STARTTLS) and notes it in the message (X-Auth-User).
Usage: smtp_sink.py OUTDIR [--tls CERT KEY [--auth USER PASSWORD]]. Stops on SIGTERM."""
import os
import signal
import socket
import ssl
import sys
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Sink:
    def __init__(self, outdir):
        self.outdir = outdir
        self.n = 0
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.n += 1
            path = os.path.join(self.outdir, f"mail-{self.n}.eml")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(f"X-Envelope-From: {envelope.mail_from}\r\n".encode())
            f.write(f"X-Envelope-To: {', '.join(envelope.rcpt_tos)}\r\n".encode())
            f.write(f"X-Tls: {'yes' if session.ssl else 'no'}\r\n".encode())
            if session.auth_data is not None:
                f.write(f"X-Auth-User: {session.auth_data.login.decode()}\r\n".encode())
            f.write(envelope.original_content or envelope.content)
        os.rename(tmp, path)
        return "250 OK"


def main():
    outdir = sys.argv[1]
    kwargs = {}
    if len(sys.argv) >= 5 and sys.argv[2] == "--tls":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(sys.argv[3], sys.argv[4])
        kwargs = {"tls_context": ctx, "require_starttls": True}
        if len(sys.argv) >= 8 and sys.argv[5] == "--auth":
            user, password = sys.argv[6].encode(), sys.argv[7].encode()

            def authenticator(server, session, envelope, mechanism, auth_data):
                ok = isinstance(auth_data, LoginPassword) and auth_data.login == user and auth_data.password == password
                return AuthResult(success=ok, auth_data=auth_data if ok else None)

            kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    controller = Controller(Sink(outdir), hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    with open(os.path.join(outdir, "port.tmp"), "w") as f:
        f.write(str(port))
    os.rename(os.path.join(outdir, "port.tmp"), os.path.join(outdir, "port"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    controller.stop()


if __name__ == "__main__":
    main()
