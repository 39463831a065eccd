"""Question banks, one module per chapter: ``course_lib/checks/chNN_topic.py`` defines
``QUESTIONS: list[course_lib.grading.Question]`` (see CONTRIBUTING.md, "Graded exercises")."""
