#!/usr/bin/env python3
"""The report of examples/callback/run.sh: what happened to every job, read
from what each party wrote, checked against what its plan says.

    python3 report.py TMP

TMP (run.sh's temp dir) holds events.log (the workers' events: request,
reply, done; lib/example.lua), provider.log and consumer.log (every answer
a reply got), morgue_W.log and late_W.log (`luakiq morgue W list`,
`luakiq waiting W --late`), stats_held.json (`luakiq stats` while the seq
ids were held), plan.txt (`luakiq plan`) and the times t0, pushed_at,
released_at, settled_at. An id's plan is in its name (pay-late-2: late).
Prints the report; exits 1 when anything did not happen as designed.
"""
import json
import os
import statistics
import sys
from collections import defaultdict

TMP = sys.argv[1]
TIMEOUT = "reply timeout after 2 s"   # the workers' reply_timeout
PROBLEMS = []


def read(name):
    with open(os.path.join(TMP, name)) as f:
        return f.read()


def lines(name):
    return [json.loads(x) for x in read(name).splitlines() if x.strip()]


def at(name):
    return float(read(name))


def problem(msg):
    PROBLEMS.append(msg)


T0 = at("t0")
PUSHED, RELEASED, SETTLED = at("pushed_at"), at("released_at"), at("settled_at")


def rel(t):
    return "+%.2f s" % (t - T0)


events = defaultdict(list)         # (worker, id) -> events in time order
for e in sorted(lines("events.log"), key=lambda e: e["t"]):
    events[(e["w"], e["id"])].append(e)
answers = defaultdict(list)        # (worker, id) -> [(attempt, answer)] as the sender saw them
for a in lines("provider.log"):
    if a["path"] == "/pay":
        body = json.loads(a["body"])
        word = ("duplicate" if body.get("duplicate") else "accepted") if a["status"] == 200 else \
            {409: "CONFLICT", 410: "STALE", 404: "UNKNOWN", 400: "BADREPLY"}.get(a["status"], str(a["status"]))
        answers[("Payments", a["id"])].append((a["attempt"], word))
for a in lines("consumer.log"):
    answers[("Shipments", a["id"])].append((a["attempt"], a["answer"]))
dead = {(w, d["id"]): d for w in ("Payments", "Shipments") for d in lines("morgue_%s.log" % w)}
late = {w: lines("late_%s.log" % w) for w in ("Payments", "Shipments")}


def of(ev, kind):
    return [e for e in ev if e["ev"] == kind]


def ids(worker, plan):
    prefix = {"Payments": "pay-", "Shipments": "ship-"}[worker] + plan + "-"
    return sorted({i for (w, i) in events if w == worker and i.startswith(prefix)} |
                  {i for (w, i) in dead if w == worker and i.startswith(prefix)}, key=lambda i: int(i.split("-")[-1]))


def check(worker, plan, want, judge):
    """judge(id, events, answers) -> None or what went wrong; one report line."""
    got = ids(worker, plan)
    bad = [(i, judge(i, events[(worker, i)], answers[(worker, i)])) for i in got]
    bad = [(i, why) for i, why in bad if why]
    for i, why in bad:
        problem("%s %s: %s" % (worker, i, why))
    if len(got) != want:
        problem("%s %s: %d ids, want %d" % (worker, plan, len(got), want))
    return "%d/%d" % (len(got) - len(bad), want)


def replies_once(ev):
    """Each attempt's on_reply ran at most once (no double completion)."""
    seen = [e["attempt"] for e in of(ev, "reply")]
    return None if len(seen) == len(set(seen)) else "on_reply ran twice for one attempt: %s" % seen


def one_reply(ev, ans, want_answers):
    req, rep = of(ev, "request"), of(ev, "reply")
    if len(req) != 1 or len(rep) != 1:
        return "%d requests, %d replies (want 1, 1)" % (len(req), len(rep))
    if rep[0]["attempt"] != req[0]["attempt"]:
        return "the reply is of attempt %s, the request of %s" % (rep[0]["attempt"], req[0]["attempt"])
    words = [w for _, w in ans]
    if words not in want_answers:
        return "the replies were answered %s" % words
    return replies_once(ev)


def late_then_done(worker, i, ev, ans):
    req, rep = of(ev, "request"), of(ev, "reply")
    if len(req) != 2 or len(rep) != 1 or rep[0]["attempt"] != req[1]["attempt"]:
        return "%d requests, %d replies (want 2, then the reply of the second)" % (len(req), len(rep))
    if sorted(ans) != sorted([(req[0]["attempt"], "STALE"), (req[1]["attempt"], "accepted")]):
        return "the replies were answered %s" % ans
    if not any(x["id"] == i and x["attempt"] == req[0]["attempt"] for x in late[worker]):
        return "its late reply is not among the late replies"
    return replies_once(ev)


def timed_out(worker, i, ev, ans):
    req = of(ev, "request")
    if len(req) != 2 or of(ev, "reply") or ans:
        return "%d requests, %d replies, answers %s (want 2, 0, none)" % (len(req), len(of(ev, "reply")), ans)
    d = dead.get((worker, i))
    if not d or d["error"] != TIMEOUT:
        return "not in the morgue with '%s': %s" % (TIMEOUT, d)
    return None


def in_order(ev, ans):
    """seq: steps [1] requested and replied, then [2, 3] (pushed while it
    waited) requested and replied."""
    kinds = [(e["ev"], e["steps"]) for e in ev]
    if kinds != [("request", [1]), ("reply", [1]), ("request", [2, 3]), ("reply", [2, 3])]:
        return "events %s" % kinds
    if not PUSHED < ev[1]["t"]:
        return "steps 2 and 3 were pushed after its first reply"
    if [w for _, w in ans] != ["accepted", "accepted"]:
        return "the replies were answered %s" % ans
    return replies_once(ev)


def not_dead(worker, judge):
    def j(i, ev, ans):
        if (worker, i) in dead:
            return "in the morgue: " + dead[(worker, i)]["error"]
        return judge(i, ev, ans)
    return j


out = []
stale_twice = 0
for worker, how in (("Payments", "callbacks over HTTP to the reply URL"),
                    ("Shipments", "answers on a topic, replied by key by consumer.py")):
    n_ok, n_twice, n_late, n_never, n_seq = \
        {"Payments": (12, 4, 3, 3, 5), "Shipments": (10, 4, 3, 2, 4)}[worker]
    out.append("%s (%s; reply_timeout 2 s, 1 retry):" % (worker, how))
    r = check(worker, "ok", n_ok, not_dead(worker, lambda i, ev, ans: one_reply(ev, ans, [["accepted"]])))
    out.append("  ok      %s completed: answered once, accepted" % r)
    if worker == "Payments":
        r = check(worker, "twice", n_twice, not_dead(worker, lambda i, ev, ans: one_reply(
            ev, ans, [["accepted", "duplicate"]])))
        out.append("  twice   %s completed: called back twice before the request's 202: accepted, then "
                   "duplicate (200); on_reply ran once" % r)
    else:
        r = check(worker, "twice", n_twice, not_dead(worker, lambda i, ev, ans: one_reply(
            ev, ans, [["accepted", "duplicate"], ["accepted", "STALE"]])))
        st = sum(1 for i in ids(worker, "twice") if [w for _, w in answers[(worker, i)]] == ["accepted", "STALE"])
        stale_twice += st
        out.append("  twice   %s completed: the message delivered twice: accepted, then duplicate (%d) or "
                   "stale, handled already (%d); on_reply ran once" % (r, n_twice - st, st))
    r = check(worker, "late", n_late, not_dead(worker, lambda i, ev, ans: late_then_done(worker, i, ev, ans)))
    out.append("  late    %s completed on the retry: the first attempt timed out (%s); its answer, after "
               "that, was refused as stale (%s) and kept as a late reply" %
               (r, TIMEOUT, "410" if worker == "Payments" else "STALE"))
    r = check(worker, "never", n_never, lambda i, ev, ans: timed_out(worker, i, ev, ans))
    out.append("  never   %s timed out as designed: %s, retried once, then the morgue" % (r, TIMEOUT))
    r = check(worker, "seq", n_seq, not_dead(worker, lambda i, ev, ans: in_order(ev, ans)))
    out.append("  seq     %s completed in order: step 1, its reply, then steps 2 and 3 (pushed while it "
               "waited) as one job, their reply" % r)
    if worker == "Payments":
        def done_once(i, ev, ans):
            return None if [e["ev"] for e in ev] == ["done"] else "events %s" % [e["ev"] for e in ev]
        r = check(worker, "cached", 20, done_once)
        out.append("  cached  %s done at once (no provider)" % r)
    extra = sorted(i for (w, i) in dead if w == worker and "-never-" not in i)
    if extra:
        problem("%s: in the morgue unexpectedly: %s" % (worker, ", ".join(extra)))

# per-id order: when the seq ids' steps 2 and 3 came, and their replies
seq = [(w, i) for (w, i) in events if "-seq-" in i]
first_replies = [of(events[k], "reply")[0]["t"] for k in seq if of(events[k], "reply")]
if first_replies:
    out.append("Per-id order: %d ids got steps 2 and 3 pushed (%s) while they waited (their replies came %s to %s): "
               "each ran them after its reply" % (len(seq), rel(PUSHED), rel(min(first_replies)), rel(max(first_replies))))

# the shards never blocked: while the seq ids' answers were held, the
# cached payments (other ids, the same shards) were pushed and done
held = json.loads(read("stats_held.json"))["total"]["waiting"]
threads = sum(1 for x in read("plan.txt").splitlines() if x.startswith("t"))
shards = sum(len(x.split(":", 1)[1].split(",")) for x in read("plan.txt").splitlines() if x.startswith("t"))
cached = [e for k, ev in events.items() if "-cached-" in k[1] for e in ev if e["ev"] == "done"]
lat = [(e["t"] - e["at"]) * 1000 for e in cached]
held_from = min((e["t"] for k in seq for e in of(events[k], "request")), default=RELEASED)
meanwhile = sum(1 for k, ev in events.items() if "-seq-" not in k[1] for e in ev
                if e["ev"] == "reply" and held_from < e["t"] < RELEASED)
if lat:
    on = sorted({e["shard"] for e in cached} & {e["shard"] for k in seq if k[0] == "Payments"
                                                 for e in of(events[k], "request")})
    out.append("Shards never blocked: %d jobs waited for a reply at once on %d shards served by %d threads; "
               "meanwhile 20 cached payments (other ids, on Payments shards %s, where held ids waited) were "
               "pushed and done in %.0f ms median, %.0f ms at most, and %d other jobs got their replies" %
               (held, shards, threads, ", ".join(map(str, on)), statistics.median(lat), max(lat), meanwhile))
    if max(e["t"] for e in cached) >= RELEASED:
        problem("a cached payment finished after the held answers were released")
    if held < len(seq):
        problem("only %d jobs waiting while the %d seq ids were held" % (held, len(seq)))
else:
    problem("no cached payment done")
out.append("Late replies kept for operators (luakiq waiting --late): Payments %d, Shipments %d" %
           (len(late["Payments"]), len(late["Shipments"])))
reqs = [e["t"] for ev in events.values() for e in ev if e["ev"] == "request"]
reps = [e["t"] for ev in events.values() for e in ev if e["ev"] == "reply"]
if reqs and reps:
    out.append("Timeline: first request %s, held answers released %s, last reply %s, all settled %s" %
               (rel(min(reqs)), rel(RELEASED), rel(max(reps)), rel(SETTLED)))
print("\n".join(out))
if PROBLEMS:
    print("FAILED:\n  " + "\n  ".join(PROBLEMS))
    sys.exit(1)
print("OK: every job completed or timed out as designed, per-id order kept, no shard blocked")
