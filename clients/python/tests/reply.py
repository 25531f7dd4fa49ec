"""For spec/clients/replies_spec.lua: one reply, by token or by key, with
the body given as JSON text; prints the outcome, or "error: MESSAGE" and
exits 2 for an input error.
usage: python3 reply.py URL NAMESPACE WORKER token|key VALUE BODY"""
import sys

import luakiq

url, namespace, worker, how, value, body = sys.argv[1:7]
with luakiq.Client(url, namespace=namespace) as client:
    try:
        print(client.reply(worker, body=body, **{how: value}))
    except luakiq.InputError as e:
        print("error: " + str(e))
        sys.exit(2)
