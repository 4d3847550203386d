"""Tasks as plugins: each kind of sample's prompt, judge and metric, looked up by name.

``get_task("grounding", tau=0.5)`` / ``get_task("vqa")`` give a configured :class:`Task`; runners call
``task.prompt``, ``task.judge`` and ``task.summarize`` and never branch on the task. The registry lives in
:mod:`vrh.tasks.base` (a leaf); each task registers itself from its own module, which a lookup imports (every
module of this package), so a new task is one file and nothing here names it: a task class is imported from
its module (``vrh.tasks.grounding.GroundingTask``). The benchmarks' answer rules (:mod:`vrh.tasks.answer_rules`)
register the same way, into :mod:`vrh.data.answer_rule_registry`.
"""

from vrh.tasks.base import Task, describe_tasks, get_task, register_task, task_from_settings, task_names

__all__ = ["Task", "describe_tasks", "get_task", "register_task", "task_from_settings", "task_names"]
