"""For spec/clients/interop_spec.lua: enqueues each call of a JSON array of
calls (each an array of jobs) read from stdin, and prints each call's count;
an input error prints "error: MESSAGE" and exits 2.
usage: python3 interop.py URL NAMESPACE WORKER SHARDS_COUNT < calls.json"""
import json
import sys

import luakiq

url, namespace, worker, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with luakiq.Client(url, namespace=namespace) as client:
    for jobs in json.load(sys.stdin):
        try:
            print(client.enqueue(worker, jobs, shards_count=count))
        except luakiq.InputError as e:
            print("error: " + str(e))
            sys.exit(2)
