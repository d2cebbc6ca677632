"""The steps of `upvotes demo` (upvotes/commands/demo.py), one module each, in the order it runs them:

    running.py          the database, then the streaming pipeline and the live page the races run on
    baselines.py        race, part 1: read-modify-write on one hot counter, the approach this design replaces
    burst.py            race, part 2: a viral burst of votes, timed from publish to exact read
    vote_states.py      race, part 3: one vote per user, on the same posts
    real_traffic.py     race, part 4: single-vote messages, as an app publishes them
    viral_now.py        what is viral now: yesterday's viral post against the three top lists
    fold_and_verify.py  the fold, then every count, unique voters and dead letter checked

Each step says what it does on stdout (`stage.say`), and a step that fails says why and returns
None or False: the command then exits 1.
"""
