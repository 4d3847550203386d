"""Tasks as plugins: each kind of sample's prompt, judge and metric, looked up by name.

``get_task("grounding", tau=0.5)`` / ``get_task("vqa")`` give a configured :class:`Task`; runners call
``task.prompt``, ``task.judge`` and ``task.summarize`` and never branch on the task. The registry lives in
:mod:`vrh.tasks.base` (a leaf); each built-in task registers itself from its own module, imported here.
"""

from vrh.tasks.base import Task, get_task, register_task, task_from_settings, task_names
from vrh.tasks.grounding import GroundingTask
from vrh.tasks.point import PointTask
from vrh.tasks.vqa import VQATask, judge_answer

__all__ = ["GroundingTask", "PointTask", "Task", "VQATask", "get_task", "judge_answer", "register_task", "task_from_settings",
           "task_names"]
