"""The trainer's commands besides ``train``: ``eval`` (``evaluate_agent.run_eval``: an exported
agent against the baselines on a scenario's held-out traffic, no training) and ``watch``
(``watch.run_watch``: the agent in sumo-gui). Each takes the merged config and returns the exit
status; a bad input is one line on stderr and status 2."""

from tj_hybrid._warnings import quiet_known_warnings

quiet_known_warnings()  # before tj-models (PyG) is imported

__all__: list[str] = []
