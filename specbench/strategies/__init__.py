"""Drafting strategies. Each is one file with one Proposer subclass and one conf/strategy/<name>.yaml
whose `_target_` names the class; adding a strategy touches nothing else."""
