#!/usr/bin/python3
"""A local SMTP server for the notifier's tests (a test peer, not part of the product), on
Debian's python3-aiosmtpd. Offers STARTTLS with --cert/--key; refuses a recipient whose
local part starts with "reject" (550); prints "listening PORT", then one JSON line per
message: {"from", "to", "tls", "data"}. With --auth USER:PASSWORD it offers AUTH (after
STARTTLS) and prints "auth USER ok" or "auth USER refused" for each attempt.
"""
import argparse, json, socket, ssl, sys, time
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

parser = argparse.ArgumentParser()
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--auth")
args = parser.parse_args()


class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("reject"):
            return "550 5.1.1 <%s>: no such user here" % address
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        print(json.dumps({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                          "tls": session.ssl is not None,
                          "data": envelope.content.decode("utf-8", "replace")}), flush=True)
        return "250 OK"


probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
context = None
if args.cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)


def authenticator(server, session, envelope, mechanism, auth_data):
    user, _, password = args.auth.partition(":")
    given = auth_data.login.decode() if isinstance(auth_data, LoginPassword) else "?"
    ok = isinstance(auth_data, LoginPassword) and given == user and auth_data.password.decode() == password
    print("auth %s %s" % (given, "ok" if ok else "refused"), flush=True)
    return AuthResult(success=ok, handled=False)


extra = {"authenticator": authenticator, "auth_required": False} if args.auth else {}
controller = Controller(Handler(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=False,
                        **extra)
controller.start()
print("listening %d" % port, flush=True)
try:
    while True:
        # Sleep, not a clock: keeps this peer process alive until the test kills it.
        time.sleep(3600)
finally:
    controller.stop()
