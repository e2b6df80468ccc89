"""The trace report and its writers: the report and its JSON form (``trace_report.py``), the
terminal text (``report_text.py``, ``whatif_text.py``), the HTML page (``html.py``,
``charts.py``) and TensorBoard scalars (``tensorboard.py``)."""
