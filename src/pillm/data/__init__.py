"""pillm.data: corpora, token arrays, images and where they come from (docs/data.md).

Before a run, the planner calls ``check_data_config(config["data"])`` (stops a data section that
cannot work, naming the key and the fix) and prints ``download_plan(config["data"])`` (what will
be downloaded, at which revisions, and what differs from the offline mirror).
"""

from pillm.data.check import check_data_config, download_plan

__all__ = ["check_data_config", "download_plan"]
