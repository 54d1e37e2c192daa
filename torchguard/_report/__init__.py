"""What the analysis says and how it is shown: findings, the Report, exceptions,
text, markdown, colour and the code reference."""
