"""history: a store of many runs over commits, change points in it, and a trend page (issue 48).

    points    a finished run's table -> the rows a history keeps (pure: tables in, tables out)
    runs      a run folder -> its identity (fingerprint, commit, times) and its points; refuses
              a run that is not finished
    store     the DuckDB database: one file, rows keyed by fingerprint, commit, times and case;
              an add is one transaction (all of it or nothing)
    changes   change points of one series (asv's step detection) and the tail's class (as HUD)
    level     each run's level (the median shift of its cases of other series) and each case against it
    series    every case's time (against its run's level), the host's level and every series' exponent
              judged, from the store's frames (pure)
    figures, page   the trend page, from those frames (knows nothing of the database)
    backfill  one run per commit of a range, each made by that commit's own checkout
    commands, args  `python -m suite history add|backfill|check|report`

docs/history.md describes the commands, the rules and the study that calibrates them.
"""
